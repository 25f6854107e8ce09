"""The bot's own tables (history, quotas, policies, schedules, ...): SQLite files in
CELLMATE_DATA_DIR by default, or one PostgreSQL database (CELLMATE_DATABASE_URL).

`sql.py` is the one dialect the stores write, `engines.py` runs it on either engine,
`databases.py` says where the tables are, and `migrations.py` keeps them at each store's
latest version."""

from bot.database.databases import Databases, url_problem
from bot.database.engines import Database, DatabaseError, Result, Session
from bot.database.migrations import Migrations, migrate, open_store, version

__all__ = [
    "Database",
    "DatabaseError",
    "Databases",
    "Migrations",
    "Result",
    "Session",
    "migrate",
    "open_store",
    "url_problem",
    "version",
]
