"""polars' native S3 reader options for the product's S3 locations: the same endpoint, identity
and addressing as the s3fs file system :func:`specrag_batch.core.storage.filesystem` builds."""

from __future__ import annotations

from .storage import S3_PROTOCOLS, filesystem, split_uri


def polars_s3_options(uri: str) -> dict[str, str]:
    """polars' native S3 reader options (object_store ``aws_*`` keys, as strings) for an
    ``s3://``/``s3a://`` ``uri``, taken from the s3fs file system :func:`filesystem` builds for
    it, so polars reaches the same endpoint with the same identity as the rest of the product:

    * endpoint: the file system's ``endpoint_url`` (``SPECRAG_S3_ENDPOINT_URL`` /
      ``AWS_ENDPOINT_URL``, or fsspec's config); an ``http://`` endpoint allows plain HTTP.
    * credentials: the file system's own ``key``/``secret``/``token`` when set (fsspec
      config), else what botocore's chain resolves now (environment, ``~/.aws`` profile
      - the file system's ``profile`` -, web identity, instance metadata): the chain s3fs
      itself uses. Frozen at this call: temporary credentials last at least minutes, a
      report's read seconds. ``anon`` reads unsigned.
    * region: ``client_kwargs["region_name"]``, else botocore's configured region.
    * ``requester_pays`` and a ``virtual`` addressing style in ``config_kwargs``.

    Raises:
        ValueError: ``uri`` is not an S3 URI."""
    proto, _ = split_uri(uri)
    if proto not in S3_PROTOCOLS:
        raise ValueError(f"{uri!r}: not an s3:// URI")
    import botocore.session

    fs, _ = filesystem(uri)
    client_kwargs = fs.client_kwargs or {}
    opts: dict[str, str] = {}
    endpoint = fs.endpoint_url or client_kwargs.get("endpoint_url")
    if endpoint:
        opts["aws_endpoint_url"] = endpoint
        if endpoint.startswith("http://"):
            opts["aws_allow_http"] = "true"
    session = botocore.session.Session(profile=fs.kwargs.get("profile"))
    region = client_kwargs.get("region_name") or session.get_config_variable("region")
    if region:
        opts["aws_region"] = region
    if fs.anon:
        opts["aws_skip_signature"] = "true"
    else:
        key, secret, token = fs.key, fs.secret, fs.token
        if not key:
            creds = session.get_credentials()
            frozen = creds.get_frozen_credentials() if creds is not None else None
            key, secret, token = (frozen.access_key, frozen.secret_key, frozen.token) if frozen else (None,) * 3
        if key:
            opts["aws_access_key_id"], opts["aws_secret_access_key"] = key, secret
            if token:
                opts["aws_session_token"] = token
    if fs.requester_pays:
        opts["aws_request_payer"] = "true"
    if ((fs.config_kwargs or {}).get("s3") or {}).get("addressing_style") == "virtual":
        opts["aws_virtual_hosted_style_request"] = "true"
    return opts
