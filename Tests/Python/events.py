"""Small factories for events and batches (PROTOCOL.md section 1), and a client for the API."""

import datetime
import gzip
import json
import uuid

import requests


def event(type, request_id, ad_unit, format_id="10063170", at=None, **fields):
    """One valid event; `at` is a datetime (UTC) or an RFC 3339 string, default now."""
    if at is None:
        at = datetime.datetime.now(datetime.timezone.utc)
    if isinstance(at, datetime.datetime):
        at = at.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    out = {"id": str(uuid.uuid4()), "type": type, "requestId": request_id, "adUnit": ad_unit,
           "formatId": format_id, "occurredAt": at}
    out.update(fields)
    return out


def click(request_id, ad_unit, asset_key="MainImage", **fields):
    return event("click", request_id, ad_unit, assetKey=asset_key, **fields)


class API:
    """The tracker's HTTP API with a key."""

    def __init__(self, base, key=None):
        self.base = base
        self.key = key

    def headers(self, extra=None, key=None):
        headers = {}
        key = key if key is not None else self.key
        if key:
            headers["Authorization"] = f"Bearer {key}"
        headers.update(extra or {})
        return headers

    def post_events(self, events=None, body=None, content_type="application/json", key=None, extra_headers=None, gzipped=False):
        if body is None:
            body = json.dumps({"events": events}).encode()
        if gzipped:
            body = gzip.compress(body)
            extra_headers = dict(extra_headers or {}, **{"Content-Encoding": "gzip"})
        headers = self.headers(extra_headers, key)
        if content_type:
            headers["Content-Type"] = content_type
        return requests.post(self.base + "/v1/events", data=body, headers=headers, timeout=30)

    def report(self, name, key=None, accept=None, **params):
        extra = {"Accept": accept} if accept else None
        return requests.get(f"{self.base}/v1/reports/{name}", params=params, headers=self.headers(extra, key), timeout=30)

    def get(self, path, key=None, headers=None):
        return requests.get(self.base + path, headers=self.headers(headers, key), timeout=30)
