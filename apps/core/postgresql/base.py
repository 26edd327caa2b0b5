"""Django's PostgreSQL backend, aware of the protocol's limit on bound parameters.

With server-side binding (settings: ``RETASC_DB_PREPARED``) every value travels as a
parameter of the extended protocol, which carries at most 65,535 of them per statement;
client-side binding has no such limit, so Django's backend splits nothing. This backend
says so to Django, the way its SQLite and Oracle backends do for theirs, so that a large
``bulk_create`` (a seed, an import) goes out in batches that fit instead of failing.
"""

from django.db import models
from django.db.backends.postgresql import base, features, operations

MAX_QUERY_PARAMS = 2**16 - 1


class DatabaseFeatures(features.DatabaseFeatures):
    max_query_params = MAX_QUERY_PARAMS


class DatabaseOperations(operations.DatabaseOperations):
    def bulk_batch_size(self, fields, objs):
        columns = sum(len(f.fields) if isinstance(f, models.CompositePrimaryKey) else 1 for f in fields) or 1
        return max(1, min(len(objs), MAX_QUERY_PARAMS // columns))


class DatabaseWrapper(base.DatabaseWrapper):
    features_class = DatabaseFeatures
    ops_class = DatabaseOperations
