"""``python -m llama_index_recency`` is the ``llama-index-recency`` command."""

import sys

from llama_index_recency.cli import main

sys.exit(main())
