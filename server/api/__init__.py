"""gRPC transport: thin servicers (convert, delegate, convert back) and the one
interceptor that maps domain errors to status codes and records RPC metrics."""
