"""KV connectors: the step feature that moves KV blocks beyond the device cache, and the built-in connectors
(``offload``: host memory and disk; ``shared_storage`` and ``zmq``: disaggregated prefill). The contract is
:mod:`pagoda.interfaces.kv_connector`; docs/kv_offload.md is the user's view."""
