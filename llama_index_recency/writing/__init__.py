"""Writing: the one store-level write, updates and forgetting, the writer, backups."""
