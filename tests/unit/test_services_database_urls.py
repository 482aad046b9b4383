"""ServicesConfig's database URLs: schemes a server cannot use are refused with the field and
the fix named, `--postgres` excludes given URLs, and the managed cluster's URLs carry no password."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from swerl.cli import app
from swerl.services import ServicesConfig
from swerl.services.commands import all_specs, child_env


@pytest.mark.parametrize("url", ["postgresql://u:pw@db:5432/prefect", "postgresql+psycopg2://u@db/prefect",
                                 "sqlite:///prefect.db", "mysql://u@db/prefect", "/abs/prefect.db"])
def test_a_prefect_url_without_an_async_driver_is_refused_naming_the_field_and_the_fix(tmp_path, url):
    with pytest.raises(ValidationError) as e:
        ServicesConfig(home=tmp_path, prefect_database_url=url)
    [error] = e.value.errors()
    assert error["loc"] == ("prefect_database_url",)
    assert error["msg"].startswith("Value error, prefect_database_url: scheme ")
    assert "use postgresql+asyncpg://user:password@host:5432/prefect or sqlite+aiosqlite:////abs/path/prefect.db " \
           "(--prefect-database-url), or --postgres for a managed cluster" in error["msg"]


@pytest.mark.parametrize("uri", ["nosuchdb://nowhere", "postgresql+asyncpg://u@db/mlflow", "sqlite+aiosqlite:///m.db",
                                 "http://127.0.0.1:5000", "/abs/mlruns"])
def test_an_mlflow_uri_that_is_no_sync_database_is_refused_naming_the_field_and_the_fix(tmp_path, uri):
    with pytest.raises(ValidationError) as e:
        ServicesConfig(home=tmp_path, mlflow_backend_store_uri=uri)
    [error] = e.value.errors()
    assert error["loc"] == ("mlflow_backend_store_uri",)
    assert error["msg"].startswith("Value error, mlflow_backend_store_uri: scheme ")
    assert "use postgresql://user:password@host:5432/mlflow (psycopg2) or sqlite:////abs/path/mlflow.db " \
           "(--mlflow-backend-store-uri), or --postgres for a managed cluster" in error["msg"]


def test_urls_each_server_can_use_are_kept_as_given(tmp_path):
    c = ServicesConfig(home=tmp_path, prefect_database_url="postgresql+asyncpg://u:pw@db:5432/prefect",
                       mlflow_backend_store_uri="postgresql+psycopg2://u:pw@db:5432/mlflow")
    assert (c.prefect_database(), c.mlflow_store_uri()) == ("postgresql+asyncpg://u:pw@db:5432/prefect",
                                                          "postgresql+psycopg2://u:pw@db:5432/mlflow")
    for prefect, mlflow in [("sqlite+aiosqlite:////x/p.db", "sqlite:////x/m.db"), ("POSTGRESQL+ASYNCPG://db/p", "mysql://db/m")]:
        ServicesConfig(home=tmp_path, prefect_database_url=prefect, mlflow_backend_store_uri=mlflow)


def test_sqlite_stays_the_default(tmp_path):
    c = ServicesConfig(home=tmp_path)
    assert (c.postgres, c.prefect_database(), c.mlflow_store_uri()) == (False, None, f"sqlite:///{tmp_path}/mlflow.db")
    assert [s.name for s in all_specs(c)] == ["prefect-server", "mlflow", "prefect-worker"]
    assert "PGPASSFILE" not in child_env(c)


def test_the_managed_cluster_s_urls_carry_no_password_and_its_file_reaches_the_servers(tmp_path):
    c = ServicesConfig(home=tmp_path, postgres=True, postgres_port=5433)
    assert c.prefect_database() == "postgresql+asyncpg://swerl@127.0.0.1:5433/prefect"
    assert c.mlflow_store_uri() == "postgresql://swerl@127.0.0.1:5433/mlflow"
    specs = all_specs(c)
    assert [s.name for s in specs] == ["postgres", "prefect-server", "mlflow", "prefect-worker"]
    assert specs[0].command[1:] == ["-D", f"{tmp_path}/postgres/data", "-p", "5433", "-c", "listen_addresses=127.0.0.1",
                                    "-c", "unix_socket_directories="]
    assert specs[0].url == "postgresql://swerl@127.0.0.1:5433"
    assert specs[1].env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] == c.prefect_database()
    assert c.mlflow_store_uri() in specs[2].command
    assert {s.env["PGPASSFILE"] for s in specs} == {f"{tmp_path}/postgres/pgpass"}


def test_postgres_with_given_urls_is_refused_naming_both(tmp_path):
    with pytest.raises(ValidationError) as e:
        ServicesConfig(home=tmp_path, postgres=True, mlflow_backend_store_uri="postgresql://u@db/mlflow")
    assert e.value.errors()[0]["msg"] == (
        "Value error, postgres: the managed cluster holds both databases, so prefect_database_url and "
        "mlflow_backend_store_uri must be left unset; drop --postgres to use the given URLs, or drop the URLs")


def test_postgres_os_user_must_be_an_account_name(tmp_path):
    with pytest.raises(ValidationError):
        ServicesConfig(home=tmp_path, postgres_os_user="root; rm -rf /")


def test_the_cli_names_the_option_and_hides_the_password():
    result = CliRunner().invoke(app, ["up", "--prefect-database-url", "postgresql://me:s3cret@db:5432/prefect"])
    assert result.exit_code == 2
    assert "--prefect-database-url 'postgresql://me:***@db:5432/prefect': Value error, prefect_database_url: " \
           "scheme 'postgresql'" in result.stderr
    assert "postgresql+asyncpg://" in result.stderr and "s3cret" not in result.stderr
    result = CliRunner().invoke(app, ["up", "--postgres", "--prefect-database-url", "postgresql+asyncpg://db/p"])
    assert result.exit_code == 2
    assert "postgres: the managed cluster holds both databases" in result.stderr
