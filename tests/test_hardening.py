"""Hardening: bad dates, bad scores, edge-sized inputs, store locking and crashes, LLM faults, properties."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_recency import (
    RecencyBonusPostprocessor,
    RecencyChatEngine,
    RecencyPolicy,
    memory_node,
    open_memory_index,
    openai_like_llm,
)
from llama_index_recency.errors import MemoryStoreLockedError
from llama_index_recency.ranking.policy import MemoryDateError
from llama_index_recency.storage import close_memory_index, count_memories
from llama_index_recency.writing.writer import MemoryWriteError, parse_transcript, remember

from conftest import QUERY, KnownCosineEmbedding

TODAY = "2026-09-10"
TESTS = Path(__file__).parent


def candidate(raw: float | None, **metadata: object) -> NodeWithScore:
    return NodeWithScore(node=TextNode(text="fact", metadata=metadata), score=raw)


# -- the bad-date table ------------------------------------------------------------------

UNUSABLE_DATES = {
    "missing": {},
    "None": {"date": None},
    "empty string": {"date": ""},
    "blank string": {"date": "   "},
    "garbage": {"date": "last tuesday"},
    "impossible day": {"date": "2026-02-30"},
    "epoch seconds (int)": {"date": 1788998400},
    "epoch seconds (float)": {"date": 1788998400.0},
}


@pytest.mark.parametrize("metadata", UNUSABLE_DATES.values(), ids=UNUSABLE_DATES.keys())
@pytest.mark.parametrize(
    ("policy", "kept", "reason"),
    [("no_bonus", 1, "kept"), ("drop", 0, "dropped: no date")],
)
def test_unusable_date_follows_the_policy(metadata, policy, kept, reason) -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=TODAY, on_missing_date=policy)
    ranking = postprocessor.explain([candidate(0.5, **metadata)])
    (row,) = ranking.rows
    assert (len(ranking.nodes), row.bonus, row.final, row.age_days, row.reason) == (
        kept, 0.0, 0.5, None, reason
    )


@pytest.mark.parametrize("metadata", UNUSABLE_DATES.values(), ids=UNUSABLE_DATES.keys())
def test_unusable_date_raises_under_raise_policy(metadata) -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=TODAY, on_missing_date="raise")
    with pytest.raises(MemoryDateError, match="has no usable 'date'"):
        postprocessor.explain([candidate(0.5, **metadata)])


@pytest.mark.parametrize(
    ("value", "age_days", "bonus"),
    [
        ("2026-09-09", 1.0, 0.0466),
        (date(2026, 9, 9), 1.0, 0.0466),
        ("2026-09-09T00:00:00", 1.0, 0.0466),  # naive means UTC
        ("2026-09-09T09:00:00+09:00", 1.0, 0.0466),  # the same instant, offset respected
        (datetime(2026, 9, 9, 9, tzinfo=timezone(timedelta(hours=9))), 1.0, 0.0466),
        ("2026-09-09T12:00:00Z", 0.5, 0.0482),
        ("2026-12-01", 0.0, 0.05),  # future: 0 days old, never more than weight
        ("2099-01-01T00:00:00+00:00", 0.0, 0.05),
    ],
)
def test_usable_dates(value, age_days, bonus) -> None:
    (row,) = RecencyBonusPostprocessor(reference_date=TODAY).explain(
        [candidate(0.5, date=value)]
    ).rows
    assert (row.age_days, round(row.bonus, 4)) == (age_days, bonus)


# -- scores and sizes (warn-once and None/NaN scores: tests/test_postprocessor.py) ------------


def test_empty_candidates() -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=TODAY)
    assert postprocessor.postprocess_nodes([]) == []
    assert postprocessor.explain([]).rows == ()


def test_top_n_larger_than_candidates() -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=TODAY, top_n=10)
    kept = postprocessor.postprocess_nodes(
        [candidate(0.5, date=TODAY), candidate(0.4, date=TODAY), candidate(0.3, date=TODAY)]
    )
    assert [round(n.score, 2) for n in kept] == [0.55, 0.45]


# -- the local store: a second process, and a killed one -----------------------------------

def numbered_memories() -> tuple[list[TextNode], KnownCosineEmbedding]:
    """Five dated memories and an embedding giving them cosines 0.1 … 0.5 against any query."""
    nodes = [memory_node(f"Taro noted fact number {i}.", f"2026-09-0{i + 1}") for i in range(5)]
    cosines = {n.get_content(metadata_mode="embed"): 0.1 * (i + 1) for i, n in enumerate(nodes)}
    return nodes, KnownCosineEmbedding(cosines)


SUBPROCESS_PRELUDE = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from test_hardening import numbered_memories
from llama_index_recency import open_memory_index
from llama_index_recency.errors import MemoryStoreLockedError
NODES, EMBED = numbered_memories()
"""


def run_python(code: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-c", SUBPROCESS_PRELUDE + textwrap.dedent(code)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            **kwargs)


@pytest.mark.slow
def test_second_process_gets_a_clear_message(tmp_path) -> None:
    store = str(tmp_path / "store")
    index = open_memory_index(KnownCosineEmbedding({"a": 0.5}), path=store)
    second = run_python(f"""
        try:
            open_memory_index(EMBED, path={store!r})
        except MemoryStoreLockedError as error:
            print(error)
            sys.exit(3)
    """)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 3, err
    assert out.startswith(f"the memory store at {store} is already open in another process")
    assert "pass url=" in out
    close_memory_index(index)


def test_second_client_in_the_same_process_gets_the_same_error(tmp_path) -> None:
    first = open_memory_index(KnownCosineEmbedding({"a": 0.5}), path=str(tmp_path))
    with pytest.raises(MemoryStoreLockedError, match="already open"):
        open_memory_index(KnownCosineEmbedding({"a": 0.5}), path=str(tmp_path))
    close_memory_index(first)


@pytest.mark.slow
def test_killed_writer_loses_nothing(tmp_path) -> None:
    store = str(tmp_path / "store")
    with run_python(f"""
        import time
        index = open_memory_index(EMBED, path={store!r})
        for node in NODES:
            index.insert_nodes([node])
        print("written", flush=True)
        time.sleep(120)
    """) as writer:
        assert writer.stdout.readline() == "written\n"
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    # The lock died with the process; everything written is there.
    index = open_memory_index(numbered_memories()[1], path=store)
    assert count_memories(index) == 5
    best = index.as_retriever(similarity_top_k=1).retrieve(QUERY)[0]
    assert (best.node.get_content(), round(best.score, 3)) == (
        "2026-09-05: Taro noted fact number 4.", 0.5
    )


# -- the LLM endpoint down, slow, rate-limited, failing ------------------------------------


def chat_engine(api_base: str, max_retries: int = 0, timeout: float = 5.0) -> RecencyChatEngine:
    node = memory_node("Taro likes trains.", "2026-09-09")
    index = open_memory_index(KnownCosineEmbedding({node.get_content(metadata_mode="embed"): 0.5}))
    index.insert_nodes([node])
    return RecencyChatEngine.from_defaults(
        retriever=index.as_retriever(similarity_top_k=8),
        node_postprocessors=[RecencyBonusPostprocessor(reference_date=TODAY)],
        llm=openai_like_llm(api_base=api_base, timeout=timeout, max_retries=max_retries),
    )


def test_chat_with_the_endpoint_down(closed_port_url) -> None:
    with pytest.raises(openai.APIConnectionError, match="Connection error"):
        chat_engine(closed_port_url).chat(QUERY)


@pytest.mark.slow
def test_chat_with_a_slow_endpoint_times_out(openai_server) -> None:
    openai_server.always = "hang"
    with pytest.raises(openai.APITimeoutError, match="timed out"):
        chat_engine(openai_server.base_url, timeout=0.5).chat(QUERY)
    assert openai_server.count("/chat/completions") == 1


@pytest.mark.parametrize(
    ("status", "error"), [(429, openai.RateLimitError), (500, openai.InternalServerError)]
)
@pytest.mark.slow
def test_chat_fails_clearly_without_retries(openai_server, status, error) -> None:
    openai_server.always = status
    with pytest.raises(error, match=f"Error code: {status}"):
        chat_engine(openai_server.base_url).chat(QUERY)
    assert openai_server.count("/chat/completions") == 1


@pytest.mark.parametrize("status", [429, 500])
@pytest.mark.slow
def test_chat_retries_as_configured_and_recovers(openai_server, status) -> None:
    openai_server.faults = [status]
    openai_server.reply = "Trains, right?"
    assert str(chat_engine(openai_server.base_url, max_retries=1).chat(QUERY)) == "Trains, right?"
    assert openai_server.count("/chat/completions") == 2


@pytest.mark.parametrize(("max_retries", "attempts"), [(0, 1), (1, 2), (2, 3)])
@pytest.mark.slow
def test_max_retries_means_that_many_more_requests(openai_server, max_retries, attempts) -> None:
    """Stock OpenAILike retries in two layers (N·(N+1) requests); openai_like_llm keeps one."""
    openai_server.always = 500
    with pytest.raises(openai.InternalServerError):
        chat_engine(openai_server.base_url, max_retries=max_retries).chat(QUERY)
    assert openai_server.count("/chat/completions") == attempts


@pytest.mark.parametrize(
    ("fault", "cause"),
    [("down", "APIConnectionError"), ("hang", "APITimeoutError"), (429, "RateLimitError"),
     (500, "InternalServerError")],
)
@pytest.mark.slow
def test_writer_llm_failure_stores_nothing(openai_server, closed_port_url, fault, cause) -> None:
    api_base = closed_port_url if fault == "down" else openai_server.base_url
    openai_server.always = None if fault == "down" else fault
    node = memory_node("Taro likes trains.", "2026-09-01")
    index = open_memory_index(KnownCosineEmbedding({node.get_content(metadata_mode="embed"): 0.5}))
    llm = openai_like_llm(api_base=api_base, timeout=0.5 if fault == "hang" else 5.0, max_retries=0)
    with pytest.raises(MemoryWriteError, match=f"\\({cause}: .*nothing was stored"):
        remember(parse_transcript("user: I like trains."), index, llm, memory_date="2026-09-01")
    assert count_memories(index) == 0


# -- properties -------------------------------------------------------------------------------

weights = st.floats(min_value=0.0, max_value=1.0)
taus = st.floats(min_value=0.01, max_value=1000.0)
ages = st.floats(min_value=-1e6, max_value=1e6)


@given(weights, taus, ages)
def test_bonus_is_between_zero_and_weight(weight, tau, age) -> None:
    assert 0.0 <= RecencyPolicy(weight=weight, tau_days=tau).bonus(age) <= weight


@given(weights, taus, ages, ages)
def test_bonus_never_increases_with_age(weight, tau, a, b) -> None:
    policy = RecencyPolicy(weight=weight, tau_days=tau)
    younger, older = sorted((a, b))
    assert policy.bonus(younger) >= policy.bonus(older)


REFERENCE = date(2026, 9, 10)
candidates_strategy = st.lists(
    st.tuples(
        st.floats(min_value=-1.0, max_value=1.0),
        st.one_of(st.none(), st.integers(min_value=-30, max_value=400)),  # age in days; None = undated
    ),
    max_size=12,
)


def as_nodes(specs) -> list[NodeWithScore]:
    return [
        NodeWithScore(
            node=TextNode(id_=str(i), text=str(i), metadata={} if age is None else
                          {"date": (REFERENCE - timedelta(days=age)).isoformat()}),
            score=raw,
        )
        for i, (raw, age) in enumerate(specs)
    ]


@pytest.mark.slow
@given(candidates_strategy, st.floats(min_value=-1.0, max_value=1.5), st.integers(1, 5),
       st.sampled_from(["no_bonus", "drop"]))
def test_kept_nodes_never_fall_below_the_threshold(specs, threshold, top_n, policy) -> None:
    postprocessor = RecencyBonusPostprocessor(
        reference_date=REFERENCE, threshold=threshold, top_n=top_n, on_missing_date=policy
    )
    ranking = postprocessor.explain(as_nodes(specs))
    assert len(ranking.nodes) <= top_n
    assert all(n.score >= threshold for n in ranking.nodes)
    eligible = [r for r in ranking.rows if r.reason != "dropped: no date" and r.final >= threshold]
    assert [n.node.node_id for n in ranking.nodes] == [r.node_id for r in eligible[:top_n]]


@pytest.mark.slow
@given(candidates_strategy)
def test_resorting_is_stable(specs) -> None:
    ranking = RecencyBonusPostprocessor(reference_date=REFERENCE, threshold=-2.0).explain(
        as_nodes(specs)
    )
    finals = {r.node_id: r.final for r in ranking.rows}
    expected = sorted(finals, key=lambda node_id: (-finals[node_id], int(node_id)))
    assert [r.node_id for r in ranking.rows] == expected


@given(st.integers(min_value=2, max_value=8), st.integers(min_value=0, max_value=60))
def test_equal_scores_and_dates_keep_the_retriever_order(count, age) -> None:
    ranking = RecencyBonusPostprocessor(reference_date=REFERENCE, threshold=-2.0, top_n=8).explain(
        as_nodes([(0.4, age)] * count)
    )
    assert [r.node_id for r in ranking.rows] == [str(i) for i in range(count)]
