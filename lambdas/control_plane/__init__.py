"""The control plane: keeps the streaming job alive and sizes its workers."""
