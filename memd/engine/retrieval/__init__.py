"""Finding what the user said before: hybrid search, the score, episodic recall and the
gates that keep unrelated items out."""
