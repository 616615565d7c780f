"""``shelly``: the chat (Shelly's terminal UI), a Textual app over one engine session.

Imported only when the chat runs (``shelly`` on a terminal, ``shelly chat``): Textual is the
heaviest import of the CLI and no other command needs it.
"""
