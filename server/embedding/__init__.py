"""Text embedders for memory indexes (the scratchpad's semantic query).

Pluggable: :func:`make_embedder` returns the packaged all-MiniLM-L6-v2 model
when the ``embed`` extra is installed, otherwise the light hashed n-gram
embedder. Both return L2-normalised float32 rows, so inner product = cosine.
"""
