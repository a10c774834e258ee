"""The fault-tolerant Ray Train job (GPT on byte tokens) and its RayJob manifest."""
