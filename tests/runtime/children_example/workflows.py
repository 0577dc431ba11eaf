from yieldstar_django import ChildFailedError, workflow


def fetch_price(sku):
    return {"sku": sku, "price": len(sku) * 100}


@workflow("price-one")
def price_one(step, sku):
    return (yield from step.run(fetch_price, sku))


@workflow("price-catalog")
def price_catalog(step, skus):
    # One step starts every child (one transaction); one gather waits for them all.
    child_ids = yield from step.start_many(price_one, [[sku] for sku in skus])
    prices = yield from step.gather(child_ids)
    return sum(p["price"] for p in prices)


@workflow("reject-sku")
def reject_sku(step, sku):
    raise ValueError(f"unknown sku {sku}")
    yield  # a generator function: a workflow


@workflow("check-sku")
def check_sku(step, sku):
    child_id = yield from step.start(reject_sku, sku)
    try:
        return (yield from step.wait(child_id))
    except ChildFailedError as error:
        return f"{error.error_type}: {error.error_message}"


@workflow("slow-report", timeout=60)
def slow_report(step):
    yield from step.start(price_one, "abc")
    yield from step.sleep(3600)  # past its deadline: cancelled after 60 s
