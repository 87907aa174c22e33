"""The blob store: large, lossless, durable objects with metadata and
embeddings, stored once per distinct content (SHA-256 addressed).

Pieces (the rules that tie them together are in ``services/blobs.py``):

* ``catalog``   — RocksDB records: blobs, contents with reference counts,
                  uploads in progress, the session index and the search journal;
* ``uploads``   — resumable uploads streamed into staging files, hashed on the way;
* ``payloads``  — where content bytes live: a file of their own (``files``) or a
                  row of the LanceDB ``contents`` table (``lance_payloads``);
* ``reader``    — range reads that verify every block they touch (xxh3-64);
* ``index``     — LanceDB tables of embeddings + metadata for ``SearchBlobs``;
* ``cache``     — hot blobs in the DRAM tier, placed by the placement policy;
* ``blocks`` / ``hashing`` — block layout and the content hasher.
"""
