# The WIT `sql` interface: statements on the granted database, in the message's one transaction
# (committed only when the handler answers ok). Placeholders are the backend's own: `$1` for
# PostgreSQL, `?` for MySQL and SQLite.
from typing import Any, Dict, Iterator, List, Sequence, Tuple, Union

from . import backend

# What a parameter or a column value may be; bool is checked before int (bool is an int).
Value = Union[None, bool, int, float, str, bytes]

# The WIT `sql-error` cases.
SQL_ERRORS = ("denied", "unavailable", "constraint", "invalid", "other")

INT_MIN, INT_MAX = -(2**63), 2**63 - 1


class SqlError(Exception):
    """A failed statement. `kind` is the WIT case ("denied": no grant, "constraint": a unique or
    foreign key violation, ...); `detail` the database's text ("" for denied)."""

    def __init__(self, kind: str, detail: str = ""):
        if kind not in SQL_ERRORS:
            raise ValueError(f"unknown sql error {kind!r}")
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


class Rows:
    """A query's result: `columns` (names) and `rows` (tuples of Python values)."""

    __slots__ = ("columns", "rows")

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[Value]]):
        self.columns: List[str] = list(columns)
        self.rows: List[Tuple[Value, ...]] = [tuple(r) for r in rows]

    def __iter__(self) -> Iterator[Tuple[Value, ...]]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def dicts(self) -> List[Dict[str, Value]]:
        """Each row as {column: value}."""
        return [dict(zip(self.columns, r)) for r in self.rows]

    def first(self) -> Union[Tuple[Value, ...], None]:
        return self.rows[0] if self.rows else None

    def scalar(self) -> Value:
        """The first column of the first row (None when there is no row)."""
        return self.rows[0][0] if self.rows and self.rows[0] else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rows) and (self.columns, self.rows) == (other.columns, other.rows)

    def __repr__(self) -> str:
        return f"Rows(columns={self.columns!r}, rows={self.rows!r})"


def check_params(params: Sequence[Any]) -> List[Value]:
    """The parameters as SQL values; TypeError / OverflowError for what has no WIT `value`."""
    out: List[Value] = []
    for i, p in enumerate(params):
        if isinstance(p, (bytearray, memoryview)):
            p = bytes(p)
        if p is not None and not isinstance(p, (bool, int, float, str, bytes)):
            raise TypeError(f"sql parameter {i + 1}: {type(p).__name__} is not a SQL value")
        if isinstance(p, int) and not isinstance(p, bool) and not INT_MIN <= p <= INT_MAX:
            raise OverflowError(f"sql parameter {i + 1}: {p} does not fit a 64-bit integer")
        out.append(p)
    return out


def query(statement: str, *params: Any) -> Rows:
    """Runs a statement that returns rows: `sql.query("SELECT a FROM t WHERE id = $1", 7)`."""
    return backend.current().sql_query(statement, check_params(params))


def execute(statement: str, *params: Any) -> int:
    """Runs a statement; the number of rows affected."""
    return backend.current().sql_execute(statement, check_params(params))
