"""The scripted stand-ins and the service launchers that tests and benchmarks share.

Stand-ins: a scripted OpenAI-compatible LLM server (``llm_server``), a local JWT
issuer, a webhook receiver, a document server, a tiny cross-encoder, a metrics sink,
hand-made PDFs. Launchers: the real service in a subprocess (``service``, as
``make run`` starts it) and the composition root in this process (``inprocess``).
``tests/`` and ``loadtests/`` both import them from here, so neither imports the other.

Nothing else in ``serve_app`` may import this package: it is shipped only so the
benchmarks need no test tree, never used by the service itself.
"""
