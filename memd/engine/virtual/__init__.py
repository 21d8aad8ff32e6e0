"""Context virtualization: a long agent session's history kept within the model's window
by holding its tool results at lower fidelities, with what each one lost declared.

An agent resends its whole history on every call, and its tool results (files read,
commands run) soon fill the model's window; the model server then refuses the request, or
the client compacts it blindly. When a request passes the caution line of the model's
real window (mode "auto"; "on" always, "off" never: config ``virtualize``, per workspace
``virtualize_workspaces``, per request the ``X-Memd-Virtualize`` header), memd cuts the
history into objects (:mod:`.segment`), stores them per user and session (the full text
too: nothing is lost), and degrades the oldest tool results under pressure
(:mod:`.pressure`) to an extractive excerpt or a one-line stub (:mod:`.fidelity`), each
naming the object and how to get it back. The system prompt, the user's messages and the
assistant's are never degraded. Every change of fidelity is stored and shown in the call
report. Below the line, a request goes upstream exactly as the client sent it.
"""

from memd.engine.virtual.engage import Budget, Virtualized, engages, virtualize
from memd.engine.virtual.modes import HEADER, call_mode, header_mode

__all__ = ["HEADER", "Budget", "Virtualized", "call_mode", "engages", "header_mode",
           "virtualize"]
