"""The ground floor every other part builds on: row records and the data contract's schemas,
storage (local and S3), redaction of secrets, answer parsing, label sets, batched K-Means,
statistics, stopping and quiet logging. Imports nothing else of the package.

=================  =====================================================================
module             what
=================  =====================================================================
``records``        a row's records between stages (:class:`Row`, :class:`Draft`, flags)
``schema``         the input and output Arrow schemas, input validation per row
``storage``        fsspec/s3fs access: URIs, listing, atomic writes, fingerprints
``redaction``      secrets out of URIs and messages
``parsing``        answer α and rationale β out of generated text
``labels``         label sets of ``claim`` and ``choice`` rows, label distributions
``kmeans``         batched K-Means for multi-perspective sampling (paper §3.2)
``datasets``       bundled and shared evaluation sets as input rows
``stats``          paired bootstrap intervals, McNemar's exact test
``stopping``       cooperative stop on SIGTERM/SIGINT
``quiet``          telemetry and noisy third-party logs off by default
=================  =====================================================================
"""
