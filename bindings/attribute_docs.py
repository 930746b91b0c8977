"""stub"""
from dataclasses import dataclass, field
class SchemaError(Exception):
    pass
@dataclass
class Catalog:
    total: int
    attributes: dict = field(default_factory=dict)
    untyped: dict = field(default_factory=dict)
    def source_counts(self):
        return {}
def build_catalog(hs, probe, overrides):
    return Catalog(total=len(hs.enums["cudnnBackendAttributeName_t"].members))
