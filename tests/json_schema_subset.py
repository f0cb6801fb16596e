"""A validator for the part of JSON Schema (draft 2020-12) that
docs/conformance.schema.json uses: type (a name or a list), const, enum, properties, required,
additionalProperties (false or a schema), items, minItems, maxItems, minimum.
A keyword outside that subset is an error, so the schema cannot silently
outgrow what the tests check."""

KNOWN = {"$schema", "$id", "title", "description", "type", "const", "enum", "properties", "required",
         "additionalProperties", "items", "minItems", "maxItems", "minimum"}
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is_type(value, name):
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[name])


def errors(value, schema, where="$"):
    """Every place where value breaks schema, as 'path: what'."""
    unknown = set(schema) - KNOWN
    if unknown:
        raise ValueError(f"schema at {where} uses keywords outside the subset: {sorted(unknown)}")
    found = []
    kinds = schema.get("type")
    if kinds is not None and not any(_is_type(value, kind) for kind in ([kinds] if isinstance(kinds, str) else kinds)):
        return [f"{where}: {type(value).__name__} where {kinds} is required"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        found.append(f"{where}: {value} < minimum {schema['minimum']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                found.append(f"{where}: '{key}' is required")
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                found += errors(item, properties[key], f"{where}.{key}")
            elif extra is False:
                found.append(f"{where}: '{key}' is not allowed")
            elif isinstance(extra, dict):
                found += errors(item, extra, f"{where}.{key}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            found.append(f"{where}: {len(value)} items < minItems {schema['minItems']}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            found.append(f"{where}: {len(value)} items > maxItems {schema['maxItems']}")
        if "items" in schema:
            for index, item in enumerate(value):
                found += errors(item, schema["items"], f"{where}[{index}]")
    return found
