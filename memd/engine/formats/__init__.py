"""The wire formats of the doors (Chat Completions, Responses, Anthropic Messages, Ollama)
read into memd's conversation model and written back."""
