"""Memory records: text, metadata, ids and the user's name."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone

import pytest
from llama_index.core.schema import MetadataMode

from llama_index_recency import memory_node
from llama_index_recency.errors import FutureMemoryDateError
from llama_index_recency.records.examples import example_memories, example_questions
from llama_index_recency.records.nodes import MAX_FACT_CHARS, memory_id, quoted, with_subject


def test_text_has_date_prefix_and_metadata_holds_iso_date() -> None:
    node = memory_node("Taro has been drinking sweet café au lait lately.", date(2026, 9, 1))
    assert node.text == "2026-09-01: Taro has been drinking sweet café au lait lately."
    assert node.metadata == {"date": "2026-09-01"}


def test_date_is_not_shown_twice_to_embedding_or_llm() -> None:
    node = memory_node("Taro made mentaiko pasta.", "2026-09-08", metadata={"key": "pasta"})
    expected = "2026-09-08: Taro made mentaiko pasta."
    assert node.get_content(metadata_mode=MetadataMode.EMBED) == expected
    assert node.get_content(metadata_mode=MetadataMode.LLM) == expected


def test_same_fact_and_date_give_the_same_id() -> None:
    first = memory_node("Taro  drinks coffee black.", "2026-08-20")
    again = memory_node("Taro drinks coffee black.", date(2026, 8, 20))
    other_day = memory_node("Taro drinks coffee black.", "2026-08-21")
    assert first.node_id == again.node_id
    assert first.node_id != other_day.node_id


@pytest.mark.parametrize(
    ("fact", "day", "golden"),
    [
        ("Taro drinks coffee black.", "2026-08-20", "79ecbc3f-1343-5b2e-b19d-4e5cfdcc88aa"),
        ("Taro has been drinking sweet café au lait lately.", "2026-09-01",
         "2248dc73-0db0-5bc2-a20f-17b56b899292"),
        ("太郎は温泉が好き。", "2026-09-01T08:00:00+09:00", "0851fa58-000c-57b0-b051-1520386e6e44"),
    ],
)
def test_memory_ids_are_pinned(fact: str, day: str, golden: str) -> None:
    """Existing stores hold these ids: a changed uuid5 input would duplicate every memory."""
    assert memory_id(fact, day) == golden
    assert memory_node(fact, day).node_id == golden


def test_datetime_keeps_its_offset_and_the_users_day() -> None:
    node = memory_node("Taro went for a walk.", "2026-09-01T08:00:00+09:00")
    assert node.metadata["date"] == "2026-09-01T08:00:00+09:00"
    assert node.text.startswith("2026-09-01: ")  # 2026-08-31 in UTC
    naive = memory_node("Taro went for a walk.", datetime(2026, 9, 1, 20, 30))
    assert naive.metadata["date"] == datetime(2026, 9, 1, 20, 30, tzinfo=timezone.utc).isoformat()


@pytest.mark.parametrize(
    ("fact", "expected"),
    [
        ("The user drinks coffee black.", "Taro drinks coffee black."),
        ("the user's favorite food is mentaiko pasta.", "Taro's favorite food is mentaiko pasta."),
        ("User finished the article.", "Taro finished the article."),
        ("A username is not a subject.", "A username is not a subject."),
    ],
)
def test_user_name_replaces_the_generic_subject(fact: str, expected: str) -> None:
    assert memory_node(fact, "2026-09-01", user_name="Taro").text == f"2026-09-01: {expected}"


@pytest.mark.parametrize(
    ("fact", "name", "expected"),
    [
        ("ユーザーは温泉が好き。", "太郎", "太郎は温泉が好き。"),
        ("ユーザーの好物は明太子パスタ。", "太郎", "太郎の好物は明太子パスタ。"),
        ("ユーザーさんはエンドユーザー向けの記事を書いた。", "太郎",
         "太郎さんはエンドユーザー向けの記事を書いた。"),  # not inside a longer katakana word
        ("The user met the user's friend.", "Jo\\e", "Jo\\e met Jo\\e's friend."),
        ("User likes trains.", "A\\1B", "A\\1B likes trains."),
        ("The user likes trains.", "\\g<0>", "\\g<0> likes trains."),
    ],
)
def test_with_subject_replaces_both_placeholders_literally(fact: str, name: str,
                                                            expected: str) -> None:
    assert with_subject(fact, name) == expected


@pytest.mark.parametrize("name", ["Ta\nro", "Taro\r", "Ta\x1bro", "Ta\u2029ro", "", "  "])
def test_names_with_control_characters_or_blank_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=f"user_name {re.escape(repr(name))} (contains|is blank)"):
        memory_node("The user likes trains.", "2026-09-01", user_name=name)


def test_a_fact_longer_than_the_limit_is_refused_naming_length_and_limit() -> None:
    assert MAX_FACT_CHARS == 1000
    longest = "The user likes " + "x" * (MAX_FACT_CHARS - len("The user likes ."))  + "."
    assert memory_node(longest, "2026-09-01").text == f"2026-09-01: {longest}"
    with pytest.raises(ValueError, match="at most 1000 characters; this one has 1001 "):
        memory_node(longest + "!", "2026-09-01")
    # The limit applies to the stored text, after the name is filled in.
    with pytest.raises(ValueError, match="this one has 1002 "):
        memory_node(longest, "2026-09-01", user_name="Mr. Yamada")


@pytest.mark.parametrize(("fact", "day"), [("", "2026-09-01"), ("ok", "yesterday"), ("ok", 1756684800)])
def test_bad_input_is_rejected(fact: str, day: object) -> None:
    with pytest.raises(ValueError):
        memory_node(fact, day)  # type: ignore[arg-type]


def test_metadata_cannot_shadow_the_date() -> None:
    with pytest.raises(ValueError, match="'date'"):
        memory_node("Taro likes tea.", "2026-09-01", metadata={"date": "2020-01-01"})


def test_bundled_example_matches_the_seed() -> None:
    memories = example_memories()
    questions = example_questions()
    assert len(memories) == 16 and len({m.node_id for m in memories}) == 16
    assert [q.id for q in questions] == ["H1", "H2", "H3", "H4", "C1", "C2", "N1", "N2", "N3", "N4"]
    by_key = {m.metadata["key"]: m.text for m in memories}
    assert by_key["cafe_au_lait"] == "2026-09-01: Taro has been drinking sweet café au lait lately."
    assert by_key["benchmark_article"].startswith("2026-09-09: Taro finished")
    assert by_key["tts_server"].startswith("2026-08-28: ")
    assert all("the user" not in text.lower() for text in by_key.values())
    targets = {key for q in questions for key in q.targets}
    assert targets <= set(by_key)
    assert all(not q.targets for q in questions if q.kind == "hit_free")


def test_a_users_memory_id_includes_the_user_and_unscoped_ids_stay_as_in_0_1_0() -> None:
    fact, day = "The user drinks coffee black.", "2026-08-20"
    unscoped = memory_node(fact, day)
    taro = memory_node(fact, day, user_id="taro")
    hanako = memory_node(fact, day, user_id="hanako")
    assert unscoped.node_id == memory_id(fact, day)  # what 0.1.0 stored: no duplicates
    assert len({unscoped.node_id, taro.node_id, hanako.node_id}) == 3
    assert taro.node_id == memory_node(fact, day, user_id="taro").node_id  # still deterministic
    assert taro.metadata == {"date": day, "user_id": "taro"}
    assert "taro" not in taro.get_content(metadata_mode="embed")


A_ID, B_ID = "00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b"


def test_supersedes_is_stored_as_a_sorted_id_list_never_shown() -> None:
    node = memory_node("The user drinks tea now.", "2026-09-08", supersedes=[B_ID, A_ID, B_ID])
    assert node.metadata["supersedes"] == [A_ID, B_ID]
    assert node.get_content(metadata_mode="llm") == "2026-09-08: The user drinks tea now."


@pytest.mark.parametrize("links", [{"supersedes": [A_ID, "not-a-uuid"]},
                                   {"metadata": {"supersedes": ["not-a-uuid"]}}])
def test_supersedes_names_only_uuid_memory_ids(links) -> None:
    with pytest.raises(ValueError, match=r"^supersedes names 'not-a-uuid', which is not a memory "
                                         r"id \(a UUID string\)$"):
        memory_node("The user drinks tea now.", "2026-09-08", **links)


@pytest.mark.parametrize("user_id", ["", "  ", 7])
def test_a_blank_or_non_string_user_id_is_refused(user_id) -> None:
    with pytest.raises(ValueError, match="user_id must be a non-blank string"):
        memory_node("The user likes tea.", "2026-09-08", user_id=user_id)


def test_user_id_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="pass user_id as the user_id= argument or in metadata"):
        memory_node("The user likes tea.", "2026-09-08", user_id="a", metadata={"user_id": "b"})


# -- dates after tomorrow (issue 18, item 9) ---------------------------------------------------


def test_a_memory_dated_after_tomorrow_is_refused_naming_the_date() -> None:
    today = date.today().isoformat()
    with pytest.raises(FutureMemoryDateError) as refused:
        memory_node("The user likes tea.", "2099-01-01")
    assert str(refused.value) == (
        f"the memory's date 2099-01-01 is after tomorrow (today is {today}); "
        "pass allow_future=True if that is meant")
    assert "\n" not in str(refused.value)
    assert isinstance(refused.value, ValueError)
    day_after_tomorrow = date.today() + timedelta(days=2)
    with pytest.raises(ValueError, match=f"date {day_after_tomorrow.isoformat()} is after"):
        memory_node("The user likes tea.", day_after_tomorrow)


def test_tomorrow_and_today_are_accepted() -> None:
    for day in (date.today(), date.today() + timedelta(days=1)):
        assert memory_node("The user likes tea.", day).metadata["date"] == day.isoformat()


def test_allow_future_accepts_a_later_date() -> None:
    node = memory_node("The user moves in spring.", "2099-01-01", allow_future=True)
    assert node.text == "2099-01-01: The user moves in spring."
    assert node.node_id == memory_node("The user moves in spring.", "2099-01-01",
                                       reference_date="2098-12-31").node_id


@pytest.mark.parametrize("reference", ["2026-09-10", date(2026, 9, 10),
                                       datetime(2026, 9, 10, 23, 30, tzinfo=timezone.utc)])
def test_reference_date_is_today(reference: object) -> None:
    assert memory_node("The user likes tea.", "2026-09-11", reference_date=reference)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"date 2026-09-12 is after tomorrow \(today is 2026-09-10\)"):
        memory_node("The user likes tea.", "2026-09-12", reference_date=reference)  # type: ignore[arg-type]
    # A past reference makes the machine's today a future date.
    with pytest.raises(FutureMemoryDateError):
        memory_node("The user likes tea.", date.today(), reference_date=reference)  # type: ignore[arg-type]


def test_a_datetime_counts_by_its_own_calendar_day() -> None:
    # 2026-09-11T23:59 in Tokyo is the 11th: tomorrow; 2026-09-12T00:30+09:00 is the 12th.
    tokyo = timezone(timedelta(hours=9))
    assert memory_node("The user likes tea.", datetime(2026, 9, 11, 23, 59, tzinfo=tokyo),
                       reference_date="2026-09-10")
    with pytest.raises(FutureMemoryDateError, match="date 2026-09-12 "):
        memory_node("The user likes tea.", "2026-09-12T00:30:00+09:00",
                    reference_date="2026-09-10")


def test_the_far_end_of_the_calendar_does_not_overflow() -> None:
    assert memory_node("The user likes tea.", "9999-12-31", reference_date="9999-12-31")
    with pytest.raises(FutureMemoryDateError, match="9999-12-31"):
        memory_node("The user likes tea.", "9999-12-31")


def test_a_memory_cannot_supersede_itself() -> None:
    own = memory_node("Taro drinks tea.", "2026-09-01", user_id="taro")
    with pytest.raises(ValueError, match=f"^memory {own.node_id} \\('Taro drinks tea.'\\) "
                                         "cannot supersede itself$"):
        memory_node("Taro drinks tea.", "2026-09-01", user_id="taro", supersedes=[own.node_id])


def test_a_fact_quoted_in_a_message_is_cut_where_the_quote_shows_it() -> None:
    assert quoted("Taro likes tea.") == "'Taro likes tea.'"
    assert quoted("Taro likes tea. " * 10, limit=20) == "'Taro likes tea. Taro'..."
