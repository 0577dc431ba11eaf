from yieldstar_django import define_queue, workflow

# At most 5 emails being sent at once.
emails = define_queue("emails", concurrency=5)
# At most 20 exports at once, and one per customer.
exports = define_queue("exports", concurrency=20, per_key=1)
# At most 100 calls a minute to a partner's API.
partner_api = define_queue("partner-api", rate=(100, 60))
# Reindexing, debounced per document.
search_index = define_queue("search-index", concurrency=2)

SENT = []


def deliver(address, subject):
    SENT.append(address)  # the real thing would call the mail service
    return "sent"


@workflow("send-email")
def send_email(step, address, subject):
    return (yield from step.run(deliver, address, subject))


@workflow("export-orders")
def export_orders(step, customer):
    return (yield from step.run(str.upper, customer))


@workflow("reindex")
def reindex(step, document_id, revision):
    return (yield from step.run(int, revision))
