"""The data provider's publishing transports: they live in ``operators/transports.py`` (shared with
the operator runner, which goes into slim container images); re-exported here."""
from operators.transports import (  # noqa: F401
                                  ConfirmCallback,
                                  KafkaPublisher,
                                  MemoryTransport,
                                  OutMessage,
                                  RabbitPublisher,
                                  Transport,
                                  TransportError,
                                  TransportStats,
                                  create_topics,
                                  declare_wiring,
)
