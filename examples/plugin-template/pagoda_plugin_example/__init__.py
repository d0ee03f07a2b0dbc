"""pagoda-plugin-example: a Pagoda plugin registering the 'example' attention backend."""

__version__ = "0.1.0"
