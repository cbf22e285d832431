"""Command line ``llama-index-recency``: demo, calibrate, and add / ask / list / remember / forget /
history / export / import on a store.

Ranking uses the store's policy (:func:`~llama_index_recency.storage.store.index_policy`: the one
``calibrate --save`` recorded, else the model's shipped one); ``--weight``, ``--tau-days``
and ``--threshold`` override it. ``--user`` scopes add / ask / list / remember / forget /
history / export to one user's memories.

One small function per subcommand (``run_demo``, ``run_calibrate``, ``run_add``, ...), each taking the parsed arguments and a :class:`Session`
(consoles, embedding model, timings). Failures are exceptions; :func:`main` alone turns
them into one line on stderr and an exit code (:func:`describe`). Text that comes from a
user or an LLM is always printed through :func:`literal`, never as rich markup.

The package, by concern (each module imports only those listed after it; only :func:`main`
is public):

- ``parser``: the argparse parser, its options and argument types; maps each subcommand
  to its function.
- ``commands``: demo, add, ask, remember, list, forget and migrate, and the ranking and
  LLM steps they share.
- ``backup``: export, import, history, and the JSON that ``list``, ``history`` and ``export``
  print with ``--json`` (one document on stdout, never JSON Lines).
- ``calibrate``: calibrate, and calibrate's gate fit for a store without labels.
- ``inputs``: reading and checking memory, transcript and questions files.
- ``rendering``: everything printed: rich tables and lines, :func:`literal`, ``ask --json``'s
  document, and stdout's console (piped, it wraps nothing).
- ``session``: :class:`Session` (consoles, embedding model, timings, storing through
  ``insert_memories``), :class:`Location`, the errors and :func:`describe`.
- ``progress``: a write's progress: a bar on a terminal, plain lines on stderr otherwise.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence

from llama_index.core.base.embeddings.base import BaseEmbedding
from rich.console import Console
from rich.text import Text

from llama_index_recency.cli.parser import build_parser, checked_argv
from llama_index_recency.cli.rendering import literal, reader_gone, stdout_console
from llama_index_recency.cli.session import DEBUG_ENV, Session, describe


def main(argv: Sequence[str] | None = None, *, embed_model: BaseEmbedding | None = None) -> int:
    """Entry point of the ``llama-index-recency`` console script.

    ``embed_model`` replaces the model ``--model`` would load (notebooks and tests
    reuse one loaded model this way). Any failure is one line on stderr and a non-zero
    exit; set ``RECENCY_DEBUG=1`` to see the traceback of an unexpected one.
    """
    # Piped, stdout wraps nothing (rendering.stdout_console); errors are one line anyway.
    session = Session(stdout_console(), Console(stderr=True, soft_wrap=True), embed_model)
    # qdrant-client's version check (in a thread) warns about a server that does not answer;
    # the error line names it already.
    warnings.filterwarnings("ignore", message="Failed to obtain server version")
    args = None
    try:
        args = build_parser().parse_args(checked_argv(sys.argv[1:] if argv is None else argv))
        return int(args.run(args, session) or 0)
    except KeyboardInterrupt:
        session.errors.print(Text("interrupted", style="red"))
        return 130
    except BrokenPipeError:  # the reader stopped early (| head): the output ends there
        reader_gone()
        # Only a command that shows what it read is done; one that writes may have stopped
        # before its write.
        return 0 if getattr(args, "shows_only", False) else 1
    except Exception as error:
        if os.environ.get(DEBUG_ENV):
            raise
        message, code = describe(error)
        session.errors.print(Text("error: ", style="red") + literal(" ".join(message.split())))
        return code
