"""Importing the history users already have: the conversations their clients (Claude
Code, ChatGPT and Claude.ai exports, aider, Continue, Cline, opencode) kept on disk,
learnt from under the rules of live traffic (:mod:`memd.imports.write`), one module per
client format (:mod:`memd.imports.sources`).
"""

from memd.imports.base import Source
from memd.imports.model import Conversation, ToolCall, Turn
from memd.imports.sources import SOURCES, source
from memd.imports.write import ImportCounts, import_conversations, plan_import

__all__ = ["SOURCES", "Conversation", "ImportCounts", "Source", "ToolCall", "Turn",
           "import_conversations", "plan_import", "source"]
