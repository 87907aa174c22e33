"""tiermem as a remote store for LMCache.

``tiermem.client.lmcache.connector.TiermemConnector`` is a remote storage
plugin for LMCache's in-process engine (LMCache >= 0.5). Configure it with::

    remote_storage_plugins: ["tiermem"]
    extra_config:
      remote_storage_plugin.tiermem.module_path: tiermem.client.lmcache.connector
      remote_storage_plugin.tiermem.class_name: TiermemConnector
      remote_storage_plugin.tiermem.address: 127.0.0.1:50051
      remote_storage_plugin.tiermem.namespace: default      # optional
      remote_storage_plugin.tiermem.salt: tenant-a          # optional
      remote_storage_plugin.tiermem.cold_after_hit: true    # optional, one-shot traffic

``tiermem.client.lmcache.l2_adapter.TiermemL2Adapter`` is an L2 adapter plugin
for LMCache's multiprocess server (``lmcache server --l2-adapter '{"type":
"plugin", ...}'``).

Importing this package does not import lmcache; ``connector`` and
``l2_adapter`` do.
The pure key and metadata conversions live in ``convert`` (no lmcache needed).
"""
