"""The ``calibrate`` subcommand: the labelled fit (or the four-candidate pass), and a store's
relevance gate fitted on itself."""

from __future__ import annotations

import argparse
from dataclasses import replace

from llama_index.core import VectorStoreIndex
from rich.console import Console
from rich.text import Text

from llama_index_recency.cli.inputs import check_targets, load_questions, select
from llama_index_recency.cli.rendering import (
    calibration_table,
    fit_table,
    literal,
    policy_fit_table,
)
from llama_index_recency.cli.session import CommandError, Location, Session, ranking_options
from llama_index_recency.fitting.calibration import (
    SEED_GRID,
    RetrievedCandidates,
    calibrate,
    fit_threshold,
    retrieve_candidates,
)
from llama_index_recency.fitting.policy_fit import fit_policy, raw_cosine_sd
from llama_index_recency.models.factories import COHORT_POLICY
from llama_index_recency.querying.gate import calibrate_gate
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.records.examples import (
    EXAMPLE_LANGUAGES,
    EXAMPLE_REFERENCE_DATE,
    ExampleQuestion,
    example_memories,
    example_questions,
)
from llama_index_recency.storage import count_memories, index_policy, save_policy


def run_calibrate(args: argparse.Namespace, session: Session) -> int:
    """Fit the policy (or run the four-candidate pass) on the bundled data or a labelled store.

    Without ``--questions``, a store (``--store`` or ``--url``) gets its relevance gate fitted
    on itself instead.

    Returns:
        The exit code: 0 when a policy was adopted (or a gate fitted), 1 when no candidate
        passes.

    Raises:
        CommandError: Options that do not go together, a ranking option the policy
            refuses (:func:`ranking_options`), a questions file that cannot be read
            or names no stored memory, unknown ``--question-ids``, labels that cannot be
            calibrated on, or (fitting a gate) a store without memories or one whose gate
            cannot be fitted.
        MemoryStoreNotFoundError: No store at ``--store`` or ``--url``.
    """
    ranking_options(args)  # a value the policy refuses, before anything loads
    bundled = args.store is None and args.url is None
    if not bundled and args.questions is None:
        return _calibrate_gate(args, session)
    if args.relevance is not None:
        raise CommandError("--relevance fits a store's gate: give --store or --url without "
                           "--questions")
    if not bundled and args.lang != "en":
        raise CommandError("--lang picks the bundled memories; a store is calibrated on "
                           "its own --questions")
    if bundled and args.save:
        raise CommandError("--save records the policy with a store: give --store or --url")
    if not args.seed:
        given = [option for option, value in (
            ("--threshold", args.threshold), ("--fit-threshold", args.fit_threshold or None),
            ("--weight", args.weight), ("--tau-days", args.tau_days)) if value is not None]
        if given:
            raise CommandError(f"{given[0]} belongs to the four-candidate pass: add --seed (the default "
                               "fit places a threshold per candidate)")
    custom = load_questions(args.questions) if args.questions else None
    today = args.today or (EXAMPLE_REFERENCE_DATE if bundled else None)
    if bundled:
        languages = EXAMPLE_LANGUAGES if args.lang == "both" else (args.lang,)
        sets = []
        for lang in languages:
            with session.store(args.model, Location(None, None), writes=True) as index:
                session.insert(index, example_memories(lang=lang))
                questions = select(custom or example_questions(lang), args.question_ids)
                label = lang if len(languages) > 1 else None
                sets.append(_retrieve_all(session, index, questions, label))
                base = index_policy(index, reference_date=today)
        source = f"bundled memories ({'+'.join(languages)})"
        return 0 if _report_calibration(session, sets, base, args, source) else 1
    location = Location.of(args, None)
    with session.store(args.model, location, writes=False) as index:
        assert custom is not None
        sets = [_retrieve_all(session, index, select(custom, args.question_ids), None)]
        base = index_policy(index, reference_date=today)
        adopted = _report_calibration(session, sets, base, args, str(location))
        if adopted is not None and args.save:
            save_policy(index, adopted)
            session.console.print(literal(
                f"saved with {location}: weight={adopted.weight:g}, tau_days="
                f"{adopted.tau_days:g}, threshold={adopted.threshold:g} (ask and demo use it)"))
    return 0 if adopted is not None else 1


def _calibrate_gate(args: argparse.Namespace, session: Session) -> int:
    """Fit the store's threshold on itself from the shipped off-topic bank (no labels)."""
    if args.seed or args.grid or args.question_ids or args.lang != "en":
        raise CommandError("--seed, --grid, --question-ids and --lang need --questions; "
                           "without them a store's gate is fitted from the off-topic bank")
    location = Location.of(args, None)
    with session.store(args.model, location, writes=False) as index:
        if count_memories(index) == 0:
            raise CommandError(f"no memories stored in {location}; there is no gate to fit", 1)
        current = base = index_policy(index, reference_date=args.today)
        if args.relevance == "cohort" and base.relevance != "cohort":
            # Its thresholds are cosines: none ranks in cohort units until this fit is saved.
            base = base.model_copy(update={**COHORT_POLICY, "language_thresholds": {}})
        elif args.relevance == "cosine" and base.relevance != "cosine":
            raise CommandError("the store's policy is in cohort units; a cosine gate needs a "
                               "cosine bonus: calibrate with --questions instead")
        with session.timings.stage("asking the off-topic bank"):
            try:
                fit = calibrate_gate(index, base, max_bring_up=args.max_bring_up,
                                     user_id=args.user)
            except ValueError as error:  # e.g. the user holds no memory
                whose = "" if args.user is None else f" for user {args.user!r}"
                raise CommandError(f"cannot fit the gate on {location}{whose}: {error}",
                                   1) from None
        session.console.print(literal(f"current gate: {current.gate_description()}"))
        comparable = current.gate_units == base.gate_units
        session.console.print(literal(fit.summary(base if comparable else None) + (
            "" if comparable else f"; the current gate is in {current.gate_units} units")))
        if args.save:
            adopted = fit.policy(base)
            save_policy(index, adopted)
            session.console.print(literal(
                f"saved with {location}: {adopted.relevance} {adopted.gate_description()} "
                f"(weight={adopted.weight:g}, tau_days={adopted.tau_days:g}; ask and demo use it)"))
    session.console.print(session.timings.table())
    return 0


def _retrieve_all(session: Session, index: VectorStoreIndex, questions: list[ExampleQuestion],
                  label: str | None) -> list[RetrievedCandidates]:
    """Every memory for every question (the spread needs them all); ids prefixed by ``label``."""
    total = count_memories(index)
    with session.timings.stage(f"retrieving {total} memories for {len(questions)} questions"):
        retrieved = retrieve_candidates(index.as_retriever(similarity_top_k=max(total, 1)),
                                        questions)
    if label is None:
        return retrieved
    return [RetrievedCandidates(replace(item.question, id=f"{label} {item.question.id}"),
                                item.candidates) for item in retrieved]


def _report_calibration(session: Session, sets: list[list[RetrievedCandidates]],
                        base: RecencyPolicy, args: argparse.Namespace,
                        source: str) -> RecencyPolicy | None:
    """Print the fit (or the four-candidate pass) and return the adopted policy, if any; labelled
    calibration scores raw cosines, so its policies are in cosine units."""
    console = session.console
    if args.questions is not None:
        check_targets(args.questions, sets, source)
    base = base.model_copy(update={"relevance": "cosine"})
    retrieved = [item.top(args.top_k) for retrieved_set in sets for item in retrieved_set]
    try:
        sd = raw_cosine_sd(*sets)
        console.print(literal(
            f"calibration on {source}: model={args.model}, today={base.reference().date()}, "
            f"{len(retrieved)} questions, top {args.top_k}, raw-cosine sd {sd:.4f}"))
        if args.seed:
            return _seed_pass(console, retrieved, base, args)
        fit = fit_policy(retrieved, base, sd, args.grid)
        console.print(policy_fit_table(fit))
        console.print(Text(fit.summary(), style="bold green" if fit.adopted else "bold red"))
        return fit.policy(base) if fit.adopted else None
    except ValueError as error:  # labels that cannot be calibrated on
        raise CommandError(str(error)) from error
    finally:
        console.print(session.timings.table())


def _seed_pass(console: Console, retrieved: list[RetrievedCandidates], base: RecencyPolicy,
               args: argparse.Namespace) -> RecencyPolicy | None:
    """The four-candidate pass at one threshold (fitted first with --fit-threshold)."""
    # model_copy does not validate: the options were checked by ranking_options.
    policy = base.model_copy(update={
        "weight": 0.05 if args.weight is None else args.weight,
        "tau_days": 14.0 if args.tau_days is None else args.tau_days,
        "threshold": base.threshold if args.threshold is None else args.threshold,
    })
    if args.fit_threshold:
        fit = fit_threshold(retrieved, policy)
        console.print(fit_table(fit))
        if fit.threshold is None:
            console.print(Text("No threshold separates the targets from the hit-free max; "
                               f"running the grid at {policy.threshold:g}.", style="red"))
        else:
            policy = policy.model_copy(update={"threshold": fit.threshold})
    result = calibrate(retrieved, policy, args.grid or SEED_GRID)
    console.print(calibration_table(result))
    console.print(Text(result.summary(), style="bold green" if result.adopted else "bold red"))
    if result.adopted is None:
        return None
    return policy.model_copy(update={"weight": result.adopted.weight,
                                     "tau_days": result.adopted.tau_days})
