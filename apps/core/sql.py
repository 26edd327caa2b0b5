"""Statements written once, for the few the hottest paths run on every agent action.

The ORM compiles each query anew, 1-3 ms of CPU apiece; on the claim path that was most
of a claim's CPU (docs/benchmarks.md). The statements here are built from the models' own
metadata (table and column names) and every value is prepared by its field
(``get_db_prep_save``: the same conversion the ORM applies), so they behave the same on
SQLite and PostgreSQL. Keep this module small: only statements with a measured cost.
"""

from __future__ import annotations

from django.db import connection


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _fields(model, names):
    return [model._meta.get_field(name) for name in names]


def insert(model, rows: list[dict], *, returning_pk: bool = False):
    """INSERT ``rows`` (dicts of attname -> value, the same keys in each) in one statement;
    with ``returning_pk``, return the new primary key of the (single) row."""
    if not rows:
        return None
    names = list(rows[0])
    fields = _fields(model, names)
    marks = "(" + ", ".join(["%s"] * len(fields)) + ")"
    sql = (
        f"INSERT INTO {_q(model._meta.db_table)} ({', '.join(_q(f.column) for f in fields)}) "
        f"VALUES {', '.join([marks] * len(rows))}"
    )
    params = [field.get_db_prep_save(row[name], connection) for row in rows for field, name in zip(fields, names, strict=True)]
    if returning_pk:
        sql += f" RETURNING {_q(model._meta.pk.column)}"  # PostgreSQL, and SQLite since 3.35
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()[0] if returning_pk else None


def update(model, pk, values: dict) -> int:
    """UPDATE one row by primary key; returns the number of rows changed."""
    return update_many(model, [pk], values)


def update_many(model, pks, values: dict) -> int:
    """UPDATE the rows with these primary keys to the same ``values``."""
    pks = list(pks)
    if not pks:
        return 0
    fields = _fields(model, list(values))
    pk_field = model._meta.pk
    sql = (
        f"UPDATE {_q(model._meta.db_table)} SET {', '.join(f'{_q(f.column)} = %s' for f in fields)} "
        f"WHERE {_q(pk_field.column)} IN ({', '.join(['%s'] * len(pks))})"
    )
    params = [field.get_db_prep_save(values[field.attname], connection) for field in fields]
    with connection.cursor() as cur:
        cur.execute(sql, [*params, *(pk_field.get_db_prep_value(pk, connection) for pk in pks)])
        return cur.rowcount


def marks(model, pks) -> tuple[str, list]:
    """``%s, %s, ...`` and the prepared primary keys, for ``pk IN (...)``."""
    prep = model._meta.pk.get_db_prep_value
    return ", ".join(["%s"] * len(pks)), [prep(pk, connection) for pk in pks]


def select_for_update(model, pk, names: list[str]) -> tuple | None:
    """Read ``names`` of one row, locked for update (``FOR NO KEY UPDATE`` on PostgreSQL;
    SQLite's write transaction already excludes other writers). Values come back as the
    driver returns them: use it for integers and text only."""
    fields = _fields(model, names)
    pk_field = model._meta.pk
    sql = f"SELECT {', '.join(_q(f.column) for f in fields)} FROM {_q(model._meta.db_table)} WHERE {_q(pk_field.column)} = %s"
    if connection.vendor == "postgresql":
        sql += " FOR NO KEY UPDATE"
    with connection.cursor() as cur:
        cur.execute(sql, [pk_field.get_db_prep_value(pk, connection)])
        return cur.fetchone()


# --- reading whole rows into model instances ------------------------------------------

_converters: dict = {}


_column_lists: dict = {}


def columns(model, alias: str) -> str:
    """``alias.col, ...`` for every concrete field of ``model``, in ``load`` order."""
    key = (model, alias, connection.vendor)
    if key not in _column_lists:
        _column_lists[key] = ", ".join(f"{alias}.{_q(f.column)}" for f in model._meta.concrete_fields)
    return _column_lists[key]


def width(model) -> int:
    return len(model._meta.concrete_fields)


def converter(model, names: list[str]):
    """A function turning a raw row of the columns ``names`` of ``model`` into the
    values the ORM would give (``values_list``): UUIDs, datetimes, booleans."""
    plan = []
    for name in names:
        field = model._meta.get_field(name)
        col = field.get_col(model._meta.db_table)
        plan.append((col, connection.ops.get_db_converters(col) + field.get_db_converters(connection)))

    def convert(row):
        out = []
        for value, (col, funcs) in zip(row, plan, strict=True):
            for func in funcs:
                value = func(value, col, connection)
            out.append(value)
        return tuple(out)

    return convert


def load(model, values):
    """An instance of ``model`` from the raw values of ``columns(model, ...)``, each
    converted as the ORM converts it (backend and field converters), marked as loaded."""
    fields = model._meta.concrete_fields
    cached = _converters.get((model, connection.vendor))
    if cached is None:
        cached = []
        for field in fields:
            col = field.get_col(model._meta.db_table)
            funcs = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
            cached.append((col, funcs))
        _converters[(model, connection.vendor)] = cached
    converted = []
    for value, (col, funcs) in zip(values, cached, strict=True):
        for func in funcs:
            value = func(value, col, connection)
        converted.append(value)
    return model.from_db(connection.alias, [f.attname for f in fields], converted)
