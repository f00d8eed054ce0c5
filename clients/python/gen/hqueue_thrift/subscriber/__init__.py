__all__ = ['ttypes', 'constants', 'HQueueSubscriberService']
