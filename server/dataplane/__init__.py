"""The data plane: fast paths for the bytes of large objects of any kind.

* ``shm.SharedMemoryPlane`` — clients on this host map the DRAM arena and
  write (reserve → fill → commit) or read (lease → read → release) objects in
  place, under leases from ``services.leases.LeaseTable``.
* ``transfers.BulkTransfers`` + ``bulk.BulkServer`` — tickets negotiated over
  gRPC, bytes over a plain TCP connection straight into reserved buffers.

Both reuse the object service's put path (``ObjectService.prepare`` /
``reserve`` / ``commit_filled``), so an object stored through either is
indistinguishable from one stored by ``Put``. Framing and host identity shared
with the client live in ``tiermem.dataplane_wire``.
"""
