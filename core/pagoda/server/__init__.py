"""The OpenAI-compatible HTTP server (``pagoda serve``).

``app.build_app(async_engine, settings)`` builds the FastAPI app; ``async_engine.AsyncEngine`` runs
the engine loop in one background thread shared by every request. Importing this package is light:
the FastAPI pieces are imported by the modules that need them.
"""
