"""Artifacts in Azure Blob Storage, linked with read-only SAS URLs that expire.

Configured by a connection string, or an account name and key, or an account name alone
with `DefaultAzureCredential` (links then use a user delegation key). Retries are few and
short: the SDK's defaults wait about a minute, and a chat answer cannot.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobSasPermissions, ContentSettings, generate_blob_sas
from azure.storage.blob.aio import BlobServiceClient, ExponentialRetry

from storage.base import DEFAULT_LINK_EXPIRY, Data, StoredObject
from storage.content_types import disposition
from storage.errors import StorageAuthError, StorageError, StorageUnavailable
from storage.names import check_key

CLOCK_SKEW = timedelta(minutes=5)


class AzureBlobStorage:
    name = "azure"

    def __init__(
        self,
        container: str,
        connection_string: str | None = None,
        account_name: str | None = None,
        account_key: str | None = None,
        public_base_url: str | None = None,
        default_expiry: timedelta = DEFAULT_LINK_EXPIRY,
        retries: int = 2,
        timeout_s: float = 20.0,
    ) -> None:
        options: dict[str, Any] = {
            # About 1 s, then 3 s, each give or take 1 s: a few seconds in all, not a minute.
            "retry_policy": ExponentialRetry(
                initial_backoff=1, increment_base=2, retry_total=retries, random_jitter_range=1
            ),
            "connection_timeout": 5,
            "read_timeout": timeout_s,
        }
        self._credential: Any = None
        if connection_string:
            self._service = BlobServiceClient.from_connection_string(connection_string, **options)
        elif account_name and account_key:
            self._service = BlobServiceClient(
                f"https://{account_name}.blob.core.windows.net",
                credential={"account_name": account_name, "account_key": account_key},
                **options,
            )
        elif account_name:
            from azure.identity.aio import DefaultAzureCredential

            self._credential = DefaultAzureCredential()
            self._service = BlobServiceClient(
                f"https://{account_name}.blob.core.windows.net",
                credential=self._credential,
                **options,
            )
        else:
            raise ValueError(
                "Azure Blob needs AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME "
                "(with AZURE_STORAGE_ACCOUNT_KEY, or a DefaultAzureCredential identity)"
            )
        self.container = container
        self.public_base_url = public_base_url.rstrip("/") if public_base_url else None
        self.default_expiry = default_expiry
        self._client = self._service.get_container_client(container)
        self._delegation_key: Any = None
        self._delegation_expiry = datetime.min.replace(tzinfo=UTC)

    @property
    def account_name(self) -> str:
        return str(self._service.account_name)

    async def check(self) -> None:
        """Create the container on first use; refuse wrong credentials once, clearly."""
        try:
            await self._client.create_container()
        except ResourceExistsError:
            pass
        except AzureError as exc:
            raise self._translate(exc, "reach the container") from exc

    async def put(
        self, key: str, data: Data, content_type: str, max_bytes: int | None = None
    ) -> StoredObject:
        check_key(key)
        content = data if isinstance(data, bytes) else b"".join([chunk async for chunk in data])
        if max_bytes is not None and len(content) > max_bytes:
            raise StorageError(f"{key.rsplit('/', 1)[-1]} is larger than {max_bytes:,} bytes")
        settings = ContentSettings(
            content_type=content_type,
            content_disposition=disposition(content_type, key.rsplit("/", 1)[-1]),
        )
        try:
            await self._client.upload_blob(key, content, overwrite=True, content_settings=settings)
        except AzureError as exc:
            raise self._translate(exc, f"upload {key.rsplit('/', 1)[-1]}") from exc
        return StoredObject(
            key=key, size=len(content), content_type=content_type, created=datetime.now(UTC)
        )

    async def link(self, key: str, expires_in: timedelta | None = None) -> str:
        check_key(key)
        now = datetime.now(UTC)
        expiry = now + (expires_in or self.default_expiry)
        signing: dict[str, Any] = {}
        credential = self._service.credential
        if self._credential is None:
            signing["account_key"] = credential.account_key
        else:
            signing["user_delegation_key"] = await self._user_delegation_key(expiry)
        token = generate_blob_sas(
            account_name=self.account_name,
            container_name=self.container,
            blob_name=key,
            permission=BlobSasPermissions(read=True),
            start=now - CLOCK_SKEW,
            expiry=expiry,
            **signing,
        )
        base = self.public_base_url or self._client.url.rsplit("/", 1)[0]
        return f"{base}/{self.container}/{quote(key)}?{token}"

    async def _user_delegation_key(self, expiry: datetime) -> Any:
        if self._delegation_key is None or self._delegation_expiry < expiry:
            now = datetime.now(UTC)
            key_expiry = max(expiry, now + timedelta(days=1))
            try:
                self._delegation_key = await self._service.get_user_delegation_key(
                    now - CLOCK_SKEW, key_expiry
                )
            except AzureError as exc:
                raise self._translate(exc, "get a user delegation key for links") from exc
            self._delegation_expiry = key_expiry
        return self._delegation_key

    async def exists(self, key: str) -> bool:
        check_key(key)
        try:
            return bool(await self._client.get_blob_client(key).exists())
        except AzureError as exc:
            raise self._translate(exc, f"check {key.rsplit('/', 1)[-1]}") from exc

    async def get(self, key: str) -> bytes | None:
        check_key(key)
        try:
            downloader = await self._client.download_blob(key)
            data: bytes = await downloader.readall()
        except ResourceNotFoundError:
            return None
        except AzureError as exc:
            raise self._translate(exc, f"read {key.rsplit('/', 1)[-1]}") from exc
        return data

    async def delete(self, key: str) -> None:
        check_key(key)
        try:
            await self._client.delete_blob(key)
        except ResourceNotFoundError:
            pass
        except AzureError as exc:
            raise self._translate(exc, f"delete {key}") from exc

    async def list(self, prefix: str = "") -> list[StoredObject]:
        found = []
        try:
            async for blob in self._client.list_blobs(name_starts_with=prefix or None):
                found.append(
                    StoredObject(
                        key=blob.name,
                        size=int(blob.size or 0),
                        content_type=str(blob.content_settings.content_type),
                        created=blob.creation_time or blob.last_modified,
                    )
                )
        except AzureError as exc:
            raise self._translate(exc, "list artifacts") from exc
        return found

    async def close(self) -> None:
        await self._service.close()
        if self._credential is not None:
            await self._credential.close()

    def _translate(self, exc: AzureError, doing: str) -> StorageError:
        where = f"Azure Blob account {self.account_name!r}, container {self.container!r}"
        if isinstance(exc, ClientAuthenticationError) or (
            isinstance(exc, HttpResponseError) and exc.status_code == 403
        ):
            return StorageAuthError(
                f"could not {doing}: {where} refused the credentials ({_first_line(exc)})"
            )
        if isinstance(exc, ServiceRequestError | ServiceResponseError):
            return StorageUnavailable(
                f"could not {doing}: {where} did not answer ({_first_line(exc)})"
            )
        return StorageError(f"could not {doing} in {where}: {_first_line(exc)}")


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
