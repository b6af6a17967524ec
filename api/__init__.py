"""The gateway: the A2A 1.0 JSON-RPC binding and the agent card over the event store."""
