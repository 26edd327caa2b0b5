"""Model attributes that read and write plaintext over sealed (encrypted) columns.

``title = Sealed()`` on a model with a ``title_enc`` BinaryField exposes ``obj.title`` as
plaintext. This is the one path between plaintext and ciphertext: views, tools and
serializers only ever see the attribute. The associated data binds the ciphertext to
the org, the table, the field and the row (``row_attr``, the primary key by default).

It subclasses ``property`` so that Django's ``Model(**kwargs)`` accepts it by name.
"""

from __future__ import annotations

import json

from apps.core import crypto, keystore


class Sealed(property):
    def __init__(self, kind: str = "text", row_attr: str = "pk", org_attr: str = "org_id"):
        super().__init__()
        self.kind = kind
        self.row_attr = row_attr
        self.org_attr = org_attr
        self.name = ""

    def __set_name__(self, owner, name):
        self.name = name
        self.column = f"{name}_enc"

    def _aad(self, instance) -> bytes:
        table = instance._meta.db_table
        return crypto.aad(str(getattr(instance, self.org_attr)), table, self.name, str(getattr(instance, self.row_attr)))

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        cache = instance.__dict__.setdefault("_plaintext", {})
        if self.name in cache:
            return cache[self.name]
        blob = getattr(instance, self.column)
        if blob is None:
            value = None
        else:
            where = f"{instance._meta.db_table}.{self.name} of row {getattr(instance, self.row_attr)}"
            org_ref = str(getattr(instance, self.org_attr))
            raw = crypto.open_sealed(keystore.data_key(org_ref), blob, self._aad(instance), where=where)
            value = raw.decode() if self.kind == "text" else raw if self.kind == "bytes" else json.loads(raw)
        cache[self.name] = value
        return value

    def __set__(self, instance, value):
        instance.__dict__.setdefault("_plaintext", {})[self.name] = value
        if value is None:
            setattr(instance, self.column, None)
            return
        if self.kind == "bytes":
            raw = bytes(value)
        else:
            raw = value.encode() if self.kind == "text" else json.dumps(value, separators=(",", ":")).encode()
        org_ref = str(getattr(instance, self.org_attr))
        setattr(instance, self.column, crypto.seal(keystore.data_key(org_ref), raw, self._aad(instance)))
