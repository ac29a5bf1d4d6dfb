"""Checks real HTTP responses against docs/openapi.yaml: the status is documented for the
operation, the media type is one of the documented ones, the body validates against the
documented JSON Schema, and every documented header is present when required and valid.
"""

import json
import pathlib

import jsonschema
import yaml

DOCUMENT_PATH = pathlib.Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
DOCUMENT_URI = "urn:tracker:openapi"


def escape(token):
    return token.replace("~", "~0").replace("/", "~1")


class Contract:
    def __init__(self, path=DOCUMENT_PATH):
        self.text = path.read_text(encoding="utf-8")
        self.document = yaml.safe_load(self.text)

    def operations(self):
        """Every documented (path, method)."""
        return {(path, method) for path, item in self.document["paths"].items()
                for method in item if method in ("get", "post", "put", "patch", "delete", "head", "options")}

    def resolve(self, node, pointer):
        """Follows a local `$ref` of a response or header object; returns (object, pointer)."""
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            assert ref.startswith("#/"), f"only local references are expected, got {ref}"
            pointer = ref[1:]
            node = self.document
            for token in ref[2:].split("/"):
                node = node[token.replace("~1", "/").replace("~0", "~")]
        return node, pointer

    def validate(self, instance, pointer, what):
        """Validates `instance` against the schema at `pointer` in the document."""
        schema = dict(self.document)
        schema["$id"] = DOCUMENT_URI
        schema["$ref"] = "#" + pointer
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        if errors:
            details = "\n".join(f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:5])
            raise AssertionError(f"{what} does not match the document:\n{details}\ninstance: {json.dumps(instance)[:800]}")

    def check(self, path, method, response):
        """Asserts that `response` (a requests.Response) is one the document allows."""
        what = f"{method.upper()} {path} -> {response.status_code}"
        operation = self.document["paths"][path][method]
        status = str(response.status_code)
        assert status in operation["responses"], f"{what}: status {status} is not documented for this operation; body: {response.text[:300]}"
        base = f"/paths/{escape(path)}/{method}/responses/{status}"
        spec, pointer = self.resolve(operation["responses"][status], base)

        for name, header in spec.get("headers", {}).items():
            header, header_pointer = self.resolve(header, f"{pointer}/headers/{escape(name)}")
            value = response.headers.get(name)
            if value is None:
                assert not header.get("required", False), f"{what}: required header {name} is missing"
                continue
            schema = header["schema"]
            kind = schema.get("type")
            try:
                parsed = int(value) if kind == "integer" else float(value) if kind == "number" else value
            except ValueError:
                raise AssertionError(f"{what}: header {name}: {value!r} is not a {kind}") from None
            self.validate(parsed, f"{header_pointer}/schema", f"{what}: header {name}")

        content = spec.get("content")
        if content is None:
            assert response.content == b"", f"{what}: no body is documented, got {response.content[:100]!r}"
            return
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        assert media_type in content, f"{what}: Content-Type {media_type!r} is not one of {sorted(content)}"
        schema_pointer = f"{pointer}/content/{escape(media_type)}/schema"
        if media_type == "application/json":
            try:
                body = response.json()
            except ValueError:
                raise AssertionError(f"{what}: the body is not JSON: {response.text[:300]}") from None
            self.validate(body, schema_pointer, f"{what}: body")
        elif media_type == "application/yaml":
            self.validate(yaml.safe_load(response.text), schema_pointer, f"{what}: body")
        else:
            self.validate(response.text, schema_pointer, f"{what}: body")

    def check_error_body(self, response, code):
        """For answers outside the document's paths (unknown path or report): the error shape and code."""
        self.validate(response.json(), "/components/schemas/Error", f"{response.request.method} {response.request.path_url} -> {response.status_code}")
        assert response.json()["error"] == code, response.text
