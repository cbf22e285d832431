"""Storage: the memory store over Qdrant Edge, local mode or a server, and what it records."""
