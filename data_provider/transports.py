"""The data provider's publishing transports: they live in ``operators/transports.py`` (shared with
the operator runner, which goes into slim container images); re-exported here."""
from operators.transports import (ConfirmCallback, KafkaPublisher, MemoryTransport, OutMessage,  # noqa: F401
                                  RabbitPublisher, Transport, TransportError, TransportStats, create_topics,
                                  declare_wiring)
