"""A model change without losing memories: the registry's live view and the re-embed worker."""
