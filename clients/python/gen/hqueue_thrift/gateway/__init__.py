__all__ = ['ttypes', 'constants', 'HQueueService']
