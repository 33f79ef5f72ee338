"""Alembic environment: perfbisect always hands over an open connection (see store.database)."""

from alembic import context

from perfbisect.store.models import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=True,  # SQLite cannot ALTER most things; batch mode copies the table
)
with context.begin_transaction():
    context.run_migrations()
