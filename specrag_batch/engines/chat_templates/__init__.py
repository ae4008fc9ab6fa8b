"""Chat templates (Jinja) pinned for packaged models whose GGUF carries none (models.py);
a package so setuptools ships them as its package data without a BuildBackendWarning."""
