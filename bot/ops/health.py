"""What /healthz reports: the Docker engine and image, the warm pool, storage, the shared
database (with CELLMATE_DATABASE_URL), and each configured platform's connection. Results
are cached briefly, so that a load balancer polling every second does not poll the engine
and storage every second."""

from __future__ import annotations

import asyncio
import time

from bot.ops.services import Services

CHECK_TIMEOUT_S = 5.0
CACHE_S = 5.0


class Health:
    def __init__(self, services: Services, platforms: list[str]) -> None:
        self.services = services
        self.platforms = platforms
        self._cached: tuple[float, dict[str, str]] | None = None
        self._lock = asyncio.Lock()

    async def checks(self) -> dict[str, str]:
        """Each check's name -> "ok", or what is wrong."""
        async with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] < CACHE_S:
                return self._cached[1]
            results = dict(
                zip(
                    ("engine", "storage"),
                    await asyncio.gather(self._engine(), self._storage()),
                    strict=True,
                )
            )
            results["pool"] = self._pool()
            if self.services.conversations.leases is not None:
                results["database"] = await self._database()
            for name in self.platforms:
                up = self.services.connected.get(name, False)
                results[name] = "ok" if up else "not connected"
            self._cached = (time.monotonic(), results)
            return results

    async def _engine(self) -> str:
        executor = self.services.agent.executor
        try:
            await asyncio.wait_for(executor.backend.check(executor.limits.runtime), CHECK_TIMEOUT_S)
        except TimeoutError:
            return f"the Docker engine did not answer within {CHECK_TIMEOUT_S:g} s"
        except Exception as exc:  # any failure is the answer, whatever its type
            return f"{type(exc).__name__}: {exc}"
        return "ok"

    async def _storage(self) -> str:
        try:
            await asyncio.wait_for(self.services.storage.check(), CHECK_TIMEOUT_S)
        except TimeoutError:
            return f"storage did not answer within {CHECK_TIMEOUT_S:g} s"
        except Exception as exc:  # any failure is the answer, whatever its type
            return f"{type(exc).__name__}: {exc}"
        return "ok"

    async def _database(self) -> str:
        """A replica whose database does not answer cannot coordinate turns with the
        others: it is not ready."""
        leases = self.services.conversations.leases
        assert leases is not None
        try:
            await asyncio.wait_for(asyncio.to_thread(leases.ping), CHECK_TIMEOUT_S)
        except TimeoutError:
            return f"the database did not answer within {CHECK_TIMEOUT_S:g} s"
        except Exception as exc:  # any failure is the answer, whatever its type
            return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        return "ok"

    def _pool(self) -> str:
        pool = self.services.agent.executor.pool
        wanted = self.services.settings.pool.size
        if wanted and pool.ready == 0 and pool.last_error is not None:
            return f"no sandbox ready: {pool.last_error}"
        return "ok"
