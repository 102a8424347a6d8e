"""The home's store on a PostgreSQL server (`[store] url`, docs/scaling.md), on asyncpg.

server.py opens the pool and brings the schema up to date (schema.py); conversations.py is a
bot's conversations there, the same interface as the SQLite file's (atlas/store/engine.py);
text.py turns text and queries into PostgreSQL's full-text search as FTS5 reads them.
"""
