"""What memd learns and unlearns: the sanitizer's place, client text told apart from the
user's words, extraction, the write path, notes, forgetting and erasure."""
