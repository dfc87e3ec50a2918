-- The store's roles, one per use (docs/operations.md, "PostgreSQL"). Run it once, connected to the `helpers`
-- database as its owner or a superuser, after `CREATE DATABASE helpers OWNER helpers`:
--
--   psql "postgresql://<admin>@<host>:5432/helpers" -f deploy/postgres/roles.sql
--
-- then give the two login roles their passwords (ALTER ROLE helpers_app PASSWORD '…'; the same for
-- helpers_reader). Running it again changes nothing.
--
--   helpers         owns the schema; only the migration Job logs in as it
--   helpers_app     the workers: reads and writes rows, never changes the schema
--   helpers_reader  the starter in Iva's pods: reads rows only (every write goes through Temporal)

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'helpers_app') THEN
        CREATE ROLE helpers_app LOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'helpers_reader') THEN
        CREATE ROLE helpers_reader LOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO helpers_app, helpers_reader;

-- Tables and sequences the migrations create from now on (they run as helpers)...
ALTER DEFAULT PRIVILEGES FOR ROLE helpers IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO helpers_app;
ALTER DEFAULT PRIVILEGES FOR ROLE helpers IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO helpers_app;
ALTER DEFAULT PRIVILEGES FOR ROLE helpers IN SCHEMA public
    GRANT SELECT ON TABLES TO helpers_reader;

-- ...and those that exist already.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO helpers_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO helpers_app;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO helpers_reader;
