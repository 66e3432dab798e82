"""The local stand-in for the production base image (Debian + torch CPU + vLLM 0.24.0 sources)."""
