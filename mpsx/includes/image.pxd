# cdef extern declarations of native/include/mpsx/image.h
from mpsx.includes.common cimport *
from mpsx.includes.buffer cimport CBuffer

cdef extern from "mpsx/image.h" namespace "mpsx" nogil:
    cdef cppclass ImageDescriptor "mpsx::ImageDescriptor":
        DataType channel_format
        int64_t width, height, feature_channels, number_of_images
        void validate() except +raise_py_error

    cdef cppclass ImageLayout "mpsx::ImageLayout":
        int64_t n, c, h, w

    cdef cppclass ImageBlock "mpsx::ImageBlock":
        int64_t image, channel, y, x
        int64_t n, c, h, w

    cdef cppclass FeatureChannelRange "mpsx::Image::FeatureChannelRange":
        int64_t first, count

    cdef cppclass CImage "mpsx::Image":
        CImage(shared_ptr[CDevice] device, const ImageDescriptor& descriptor) except +raise_py_error
        CImage(const CImage& base, int64_t first, int64_t count) except +raise_py_error
        CImage(const CImage& base, FeatureChannelRange range) except +raise_py_error
        const ImageDescriptor& descriptor()
        int64_t width()
        int64_t height()
        int64_t feature_channels()
        int64_t number_of_images()
        DataType data_type()
        CDevice& device()
        const shared_ptr[CDevice]& device_ptr()
        const shared_ptr[CBuffer]& buffer()
        uint64_t identity()
        void read(void* destination, size_t bytes, DataType host_type) except +raise_py_error
        void write(const void* source, size_t bytes, DataType host_type) except +raise_py_error
        void read(const ImageBlock& block, void* host, const ImageLayout& stride) except +raise_py_error
        void write(const ImageBlock& block, const void* host, const ImageLayout& stride) except +raise_py_error
        void synchronize(CCommandBuffer& command_buffer) except +raise_py_error
        bool is_temporary()
        int64_t read_count()
        void set_read_count(int64_t count) except +raise_py_error
        @staticmethod
        shared_ptr[CImage] temporary(CCommandBuffer& command_buffer,
                                     const ImageDescriptor& descriptor) except +raise_py_error
        @staticmethod
        shared_ptr[CImage] gather(CCommandBuffer& command_buffer,
                                  const vector[shared_ptr[CImage]]& items) except +raise_py_error
