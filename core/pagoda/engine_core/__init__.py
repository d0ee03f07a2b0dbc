"""The engine core: scheduler, KV cache and model runner behind a message interface.

``core.py`` (the loop, with overlapped steps), ``messages.py`` (the typed messages), ``proc.py``
(the core's own process) and ``client.py`` (how front ends reach it, in or out of process).
"""
