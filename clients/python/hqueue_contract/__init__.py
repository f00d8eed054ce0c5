"""What the gateway and its Python clients share, and nothing else: the contract.

The packages point one way (``tests/unit/test_package_direction.py`` enforces it)::

    gateway  ------------------------------>  hqueue_contract  <---  hqueue (the client)
    subscriber_runtime  --->  hqueue  ----->        |
                                                  imports neither

- :mod:`hqueue_contract.protocol`: the IDL (``idl/``, linked as ``hqueue_contract/idl``)
  loaded once, the transport and protocol factories, ``host:port`` addresses.
- :mod:`hqueue_contract.ids`: ``MessageID``, the one (timestamp, sequence) type of both sides
  (``hqueue.MessageID`` and the gateway's ``rowkey.MessageId`` are it).
- :mod:`hqueue_contract.limits`: partition, sequence and timestamp limits of a MessageID.
- :mod:`hqueue_contract.registry`: a subscriber's registry record and the ZooKeeper layout, which
  the gateway and the subscriber runtime both read and write.
- :mod:`hqueue_contract.zk`: how a ``host:port[,...][/chroot]`` ZooKeeper address is connected
  to (kazoo is imported only when called: it comes with the ``gateway`` extra).
- :mod:`hqueue_contract.tls`: the server-side TLS context the gateway and a subscriber serve
  with.

It depends on thriftpy2 and the standard library only. Importing it loads nothing: each
module is imported where it is used.
"""
