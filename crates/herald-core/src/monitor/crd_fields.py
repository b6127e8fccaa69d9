#!/usr/bin/env python3
# Writes crd_fields.txt: the spec fields of prometheus-operator's ServiceMonitor and PodMonitor CRDs
# (monitoring.coreos.com/v1), with the type, pattern and enum the apiserver checks for each, from
# the operator's CRD manifests:
#   git -C prometheus-operator show 6adcebc5076c34f4f55f8f5f7b1e528929373ac7:example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml > sm.yaml
#   git -C prometheus-operator show 6adcebc5076c34f4f55f8f5f7b1e528929373ac7:example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml > pm.yaml
#   python3 crd_fields.py sm.yaml pm.yaml > crd_fields.txt
import sys

import yaml


def walk(schema, path, out):
    kind = schema.get("type")
    assert not schema.get("x-kubernetes-preserve-unknown-fields"), path
    if kind == "object" and "properties" in schema:
        assert "additionalProperties" not in schema, path
        for key, sub in schema["properties"].items():
            walk(sub, f"{path}.{key}", out)
    elif kind == "object":
        assert "additionalProperties" in schema, path
        out.append(path + "{}")
    elif kind == "array":
        walk(schema["items"], path + "[]", out)
    else:
        line = f"{path} {'int-or-string' if schema.get('x-kubernetes-int-or-string') else kind}"
        if "pattern" in schema:
            line += " pattern " + schema["pattern"]
        if "enum" in schema:
            line += " enum " + " ".join(schema["enum"])
        out.append(line)


print("# The spec fields of prometheus-operator's ServiceMonitor and PodMonitor CRDs at 6adcebc (0.93.0),")
print("# written by crd_fields.py. One field a line: KIND PATH TYPE [pattern REGEX | enum VALUE...];")
print("# `[]` stands for a list's items, and a PATH ending in `{}` is a map whose keys are free.")
for kind, manifest in [("ServiceMonitor", sys.argv[1]), ("PodMonitor", sys.argv[2])]:
    crd = yaml.safe_load(open(manifest))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    fields = []
    walk(version["schema"]["openAPIV3Schema"]["properties"]["spec"], "spec", fields)
    for field in sorted(fields):
        print(kind, field)
