"""``python -m llama_index_recency.cli``, like ``python -m llama_index_recency``."""

import sys

from llama_index_recency.cli import main

sys.exit(main())
