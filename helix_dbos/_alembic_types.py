"""Column types the Alembic revisions share, frozen so released revisions never change."""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

__all__ = ["EMPTY_OBJECT", "BigId", "Json"]

Json = sa.JSON().with_variant(JSONB(), "postgresql")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
EMPTY_OBJECT = sa.text("'{}'")
