"""What handlers share through the application: the store, the config and plan limits."""

from __future__ import annotations

from aiohttp import web

from supervisor.core.config import Config
from supervisor.core.planning import PlanLimits
from supervisor.core.store import Store

STORE = web.AppKey("store", Store)
CONFIG = web.AppKey("config", Config)
LIMITS = web.AppKey("limits", PlanLimits)


def store(request: web.Request) -> Store:
    return request.app[STORE]


def config(request: web.Request) -> Config:
    return request.app[CONFIG]


def limits(request: web.Request) -> PlanLimits:
    return request.app[LIMITS]
