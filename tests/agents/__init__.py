"""Real coding-agent CLIs (opencode, qwen-code, cline, continue) driven headless through
``memd serve`` against a scripted tool-calling upstream.

``install`` puts the pinned npm packages in a cache outside the repository once;
``clients`` knows how to run each CLI non-interactively against an OpenAI-compatible base
URL; ``traffic`` holds the scripted upstream's tool loop, the recording proxy that sees
what a client sent to memd, and the corpus of that traffic under ``tests/fixtures/agents``.
"""
