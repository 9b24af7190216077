"""Expert annotation exports: readers, field checks, vocabularies, linking to passages."""
