"""Turn a checked-in deploy profile into what runs it elsewhere (Kubernetes objects)."""
